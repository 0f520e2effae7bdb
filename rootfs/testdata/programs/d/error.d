import std.stdio;

int main() {
    stderr.writeln("boom");
    return 3;
}
