#! expect: jwt@1
curl -H "Authorization: Bearer {{jwt}}" https://api.example.com/v1/runs
