from .cli import serve_command

serve_command(prog_name="python -m stdbmod.http")
