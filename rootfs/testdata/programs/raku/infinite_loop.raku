my $n = 0;
loop { $n++ }
