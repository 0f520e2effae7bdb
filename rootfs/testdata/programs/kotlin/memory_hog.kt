fun main() {
    val keep = ArrayList<ByteArray>()
    while (true) keep.add(ByteArray(1 shl 20) { 1 })
}
