program main
  integer(8) :: n
  n = 0
  do
    n = n + 1
  end do
end program main
