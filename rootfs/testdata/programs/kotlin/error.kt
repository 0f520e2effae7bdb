fun main() {
    throw IllegalStateException("boom")
}
