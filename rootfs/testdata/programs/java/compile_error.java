public class Main {
    public static void main(String[] args) {
        int x = "a";
    }
}
