fn main() {
    panic!("boom");
}
