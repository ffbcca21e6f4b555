#! expect: password@1
./download.sh --user alice --password='Tr0ub4dor&3' --out /data
