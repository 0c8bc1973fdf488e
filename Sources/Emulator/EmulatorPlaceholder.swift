// Emulator module
