fun main() {
    var n = 0L
    while (true) { n++ }
}
