class Program {
    static void Main() {
        long n = 0;
        while (true) n++;
    }
}
