fun main() {
    val name = readLine()
    println("hello, $name")
}
