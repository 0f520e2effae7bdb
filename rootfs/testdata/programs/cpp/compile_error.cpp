int main() {
	std::string s;
}
