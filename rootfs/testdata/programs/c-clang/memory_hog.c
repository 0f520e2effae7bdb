#include <stdlib.h>
#include <string.h>

/* Each MiB is kept on a list the program prints from at the end (never
   reached), so the compiler cannot drop the allocation or the writes. */
struct block {
  struct block *next;
  char bytes[(1 << 20) - sizeof(struct block *)];
};

int main(void) {
  struct block *head = NULL;
  for (;;) {
    struct block *b = malloc(sizeof *b);
    if (!b) break;
    memset(b->bytes, 1, sizeof b->bytes);
    b->next = head;
    head = b;
  }
  return head != NULL && head->bytes[0] == 2;
}
