program main
  do
    print '(a)', 'flood line'
  end do
end program main
