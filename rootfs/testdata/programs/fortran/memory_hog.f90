program main
  integer, allocatable :: a(:)
  integer :: n
  n = 262144
  do
    if (allocated(a)) deallocate(a)
    n = n * 2
    allocate(a(n))
    a = 1
  end do
end program main
