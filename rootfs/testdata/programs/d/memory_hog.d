void main() {
  ubyte[][] keep;
  for (;;) {
    auto a = new ubyte[1 << 20];
    a[] = 1;
    keep ~= a;
  }
}
