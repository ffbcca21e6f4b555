#! expect: gitlab_token@1
pip install git+https://oauth2:{{gitlab}}@gitlab.example.com/rl/lib.git
