#! expect: bearer_token@1
curl -H "Authorization: Bearer {{alnum40}}" https://registry.example.com/v2/
