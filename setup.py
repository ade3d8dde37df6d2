"""Packaging for minivllm, read from settings.ini and requirements.txt (no pkg_resources)."""
from configparser import ConfigParser
from pathlib import Path

import setuptools

here = Path(__file__).parent
cfg = ConfigParser(delimiters=["="])
cfg.read(here / "settings.ini")
cfg = cfg["DEFAULT"]
requirements = [line.strip() for line in (here / "requirements.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
runtime = {"torch", "triton", "fastcore", "transformers", "tokenizers", "safetensors", "gguf", "accelerate",
           "numpy", "matplotlib", "tqdm", "pyzmq", "msgpack", "fastapi", "uvicorn", "prometheus_client"}

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    long_description=(here / "README.md").read_text() if (here / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    author=cfg["author"],
    author_email=cfg["author_email"],
    license="Apache-2.0",
    keywords=cfg["keywords"].split(),
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: Apache Software License"],
    url=cfg["git_url"],
    project_urls={"Source": cfg["git_url"]},
    extras_require={},
    scripts=[],
    packages=setuptools.find_packages(include=["minivllm", "minivllm.*"]),
    python_requires=">=" + cfg["min_python"],
    install_requires=[r for r in requirements if r.split("==")[0] in runtime],
    entry_points={"console_scripts": cfg.get("console_scripts", "").split(),
                  "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    include_package_data=True,
    package_data={cfg["lib_path"]: ["csrc/**/*.cpp", "csrc/**/*.h"]},  # C++ built on first use
    zip_safe=False,
)
