"""The DynamoGraphDeployment object: render a spec (render.py), parse one back (parse.py), point
findings at manifest paths (paths.py), release differences (versions.py) and command lines
(commandline.py)."""
