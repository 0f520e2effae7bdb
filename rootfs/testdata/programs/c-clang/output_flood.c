#include <stdio.h>
int main(void) {
  for (;;) puts("flood line");
}
