die "boom";
