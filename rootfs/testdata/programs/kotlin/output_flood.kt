fun main() {
    while (true) println("flood line")
}
