public class Program {
    public static void Main() {
        int x = "a";
    }
}
