program hello
  implicit none
  character(len=256) :: line
  read(*, '(a)') line
  print '(a)', 'hello, ' // trim(line)
end program hello
