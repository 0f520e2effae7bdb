# A pure CPU spin: the wall-clock limit ends it with SIGKILL and the
# verdict is timeout.
while True:
    pass
