#include <iostream>
int main() {
  for (;;) std::cout << "flood line\n";
}
