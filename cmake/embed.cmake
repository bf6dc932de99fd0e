# Turns a text file into a C source defining `const char NAME[]` (NUL-terminated).
# Usage: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
file(READ "${IN}" content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," content "${content}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake. */\nconst char ${NAME}[] = {${content}0x00};\n")
