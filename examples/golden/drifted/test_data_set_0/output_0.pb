BprobsJB
"?§ôz=Y±)=¾V‡>