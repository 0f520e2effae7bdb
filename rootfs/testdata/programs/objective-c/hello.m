#import <objc/Object.h>
#include <stdio.h>
#include <string.h>

@interface Greeter : Object
+ (void)greet:(const char *)name;
@end

@implementation Greeter
+ (void)greet:(const char *)name {
	printf("hello, %s\n", name);
}
@end

int main(void) {
	char line[256];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	line[strcspn(line, "\n")] = 0;
	[Greeter greet:line];
	return 0;
}
