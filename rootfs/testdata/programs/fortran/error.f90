program boom
  write(0, '(a)') 'boom'
  call exit(3)
end program boom
