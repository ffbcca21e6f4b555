#! expect: github_token@1 github_token@2
export GH_OAUTH={{github_oauth}}
export GH_INSTALL={{github_server}}
