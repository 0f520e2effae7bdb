name = fgetl(stdin);
printf("hello, %s\n", name);
