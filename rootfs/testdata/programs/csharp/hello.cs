using System;

public class Program {
    public static void Main() {
        string name = Console.ReadLine();
        Console.WriteLine("hello, " + name);
    }
}
