using System.Collections.Generic;
class Program {
    static void Main() {
        var keep = new List<byte[]>();
        while (true) {
            var b = new byte[1 << 20];
            for (int i = 0; i < b.Length; i += 4096) b[i] = 1;
            keep.Add(b);
        }
    }
}
