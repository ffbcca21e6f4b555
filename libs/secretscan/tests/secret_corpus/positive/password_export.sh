#! expect: password@2
set -e
export DB_PASSWORD=changeme
python train.py
