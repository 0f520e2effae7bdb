: spin begin again ;
spin
