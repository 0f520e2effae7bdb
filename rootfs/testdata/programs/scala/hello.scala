object Main {
  def main(args: Array[String]): Unit = {
    val name = scala.io.StdIn.readLine()
    println("hello, " + name)
  }
}
