from rlark_tunnel_agent.main import run

run()
