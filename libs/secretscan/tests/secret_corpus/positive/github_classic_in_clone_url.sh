#! expect: github_token@2
cd /workspace
git clone https://{{github_classic}}@github.com/example/rl-recipes.git
