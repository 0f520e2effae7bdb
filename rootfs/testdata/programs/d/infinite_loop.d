import core.atomic;
shared ulong n;
void main() {
  for (;;) atomicOp!"+="(n, 1);
}
