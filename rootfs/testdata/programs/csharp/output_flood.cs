class Program {
    static void Main() {
        while (true) System.Console.WriteLine("flood line");
    }
}
