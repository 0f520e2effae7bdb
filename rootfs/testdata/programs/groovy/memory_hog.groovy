def keep = []
while (true) { byte[] b = new byte[1 << 20]; java.util.Arrays.fill(b, (byte) 1); keep << b }
