use strict;
use warnings;

my $line = <STDIN>;
chomp $line;
print "hello, $line\n";
