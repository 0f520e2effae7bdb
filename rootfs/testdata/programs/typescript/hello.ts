import * as fs from "fs";

const line: string = fs.readFileSync(0, "utf8").split("\n")[0];
console.log(`hello, ${line}`);
