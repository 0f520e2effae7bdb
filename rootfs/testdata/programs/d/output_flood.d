import std.stdio;
void main() {
  for (;;) writeln("flood line");
}
