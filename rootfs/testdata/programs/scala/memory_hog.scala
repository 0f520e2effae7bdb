object Main {
  def main(args: Array[String]): Unit = {
    val keep = new java.util.ArrayList[Array[Byte]]()
    while (true) keep.add(Array.fill[Byte](1 << 20)(1))
  }
}
