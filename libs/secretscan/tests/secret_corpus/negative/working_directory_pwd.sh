#! expect: none
PWD=/workspace/RLinf
cd "$PWD"
