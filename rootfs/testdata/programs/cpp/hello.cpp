#include <iostream>
#include <string>

int main() {
	std::string line;
	std::getline(std::cin, line);
	std::cout << "hello, " << line << std::endl;
}
