program broken
  integer :: x
  x = 'a' +
end program broken
