@interface Broken
- (void)missing
@end
