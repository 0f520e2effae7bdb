void main() {
    int x = "a";
}
