#! expect: private_key@2
cat > /root/.ssh/id_rsa <<'KEY'
-----BEGIN RSA PRIVATE KEY-----
{{pem_body}}
-----END RSA PRIVATE KEY-----
KEY
chmod 600 /root/.ssh/id_rsa
