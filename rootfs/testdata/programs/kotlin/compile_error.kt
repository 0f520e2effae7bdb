fun main() {
    val x: Int = "a"
}
