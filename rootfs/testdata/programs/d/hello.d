import std.stdio;
import std.string;

void main() {
    writeln("hello, ", readln().chomp());
}
