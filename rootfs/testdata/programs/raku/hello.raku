my $name = $*IN.get;
say "hello, $name";
