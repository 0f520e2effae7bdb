object Main {
  def main(args: Array[String]): Unit = {
    var n = 0L
    while (true) n += 1
  }
}
